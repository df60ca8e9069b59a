raise ImportError("the simulated host has no real PyTorch (simhost/site only answers version reads)")
