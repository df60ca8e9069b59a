"""What SGLang refuses (or serves silently wrong) about a target and draft model pair: the domain's rules
(`experiments.rules.model_checks`, pure), which the submission also checks against a host's listed models. One copy,
re-exported for the adapter's users.
"""

from experiments.rules.model_checks import (
    OVERRIDE_ENV,
    algorithm_problem,
    context_length_arg,
    context_length_problem,
    vocab_problem,
)

__all__ = ["OVERRIDE_ENV", "algorithm_problem", "context_length_arg", "context_length_problem", "vocab_problem"]
