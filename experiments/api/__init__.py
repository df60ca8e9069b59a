"""The JSON API (DESIGN.md contract), one module per noun like the pages. Adapters only: validation lives in forms,
changes in actions, and the JSON shape of each noun in `serializers` (which the websocket events and the exports use
too). `routes` registers every module's routes on the one `api`."""
