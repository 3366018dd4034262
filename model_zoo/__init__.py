"""dlbricks.model_zoo"""
