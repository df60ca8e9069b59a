"""Pure rules of what a submission or a launch may contain: the launch policy, hosts a worker may reach, log
metrics, model pairs, sweeps. No Django: callers pass in what the settings say."""
