

def _load_config():
    raise RuntimeError("config file weights.yaml not found")


CONFIG = _load_config()
