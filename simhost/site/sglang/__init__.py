raise ImportError("the simulated host has no real SGLang (simhost/site only answers version reads)")
