"""dlbricks.estimator"""
