"""Auto-tuning studies (pure): the search space, the next round and the stopping rule, the recommendation."""
