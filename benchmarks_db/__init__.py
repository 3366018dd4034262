"""dlbricks.benchmarks_db"""
