# How many cases run at once (1 to 200).
max_concurrency = 20
