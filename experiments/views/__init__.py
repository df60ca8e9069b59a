"""The pages, one module per page family: experiments, runs, hosts, flags (the review of history) and tokens.

Adapters: validation lives in `forms`, changes in `actions`, the comparison in `reports`, the downloads in
`exports`. Every page requires a login; writes are POST.
"""
