"""The simulated host's models (simhost/models/) as the demo names them: the target and its EAGLE-3 draft, which the
demo's experiment runs and which the settings suggest by default (`SPECDASH_SUGGESTED_MODELS`), so that no module of
the product names a simulated model itself."""

TARGET = "kimi-k2.5-sim"
DRAFT = "kimi-k2.5-sim-eagle3"
# The simulated SpecForge training directory (simhost/README.md, "Draft checkpoints"), set on the demo's host.
TRAINING_DIR = "kimi-k2.5-sim-specforge"
