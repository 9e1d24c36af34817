"""``python -m batchscope`` is ``diagnose``."""

from batchscope.cli import main

if __name__ == "__main__":
    main()
