def build_model(:
    pass
