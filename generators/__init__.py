"""dlbricks.generators"""
