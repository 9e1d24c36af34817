"""A stand-in for Nsight Compute's ``ncu`` in the tests of ``diagnose --ncu``.

It takes ncu's command line as batchscope builds it, runs the profiled command for real
(the model's step, on the CPU here), and writes a recorded ncu CSV export
(``FAKE_NCU_CSV``, one of tests/data/ncu's) to the ``--log-file``, as ncu would after
profiling the step's kernels. ``FAKE_NCU_MODE=permission`` answers as ncu does on a GPU
whose counters are for admins only; every command line it was given is appended to
``FAKE_NCU_LOG``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

# ncu's options that take a value, as batchscope passes them.
VALUED = {"--page", "--log-file", "--profile-from-start", "--target-processes",
          "--cache-control", "--clock-control", "--metrics", "--section"}


def main() -> int:
    args = sys.argv[1:]
    with open(os.environ["FAKE_NCU_LOG"], "a") as log:
        log.write(" ".join(args) + "\n")
    options: dict[str, str] = {}
    i = 0
    while i < len(args) and args[i].startswith("--"):
        if args[i] in VALUED:
            options[args[i]] = args[i + 1]
            i += 2
        else:
            i += 1
    command = args[i:]
    if os.environ.get("FAKE_NCU_MODE") == "permission":
        print("==PROF== Connected to process 4242", flush=True)
        print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA "
              "GPU Performance Counters on the target device 0.", flush=True)
        return 1
    print("==PROF== Connected to process", os.getpid(), flush=True)
    step = subprocess.run(command, check=False)
    if step.returncode != 0:
        print(f"==ERROR== The application returned an error code ({step.returncode}).")
        return step.returncode
    shutil.copyfile(os.environ["FAKE_NCU_CSV"], options["--log-file"])
    print("==PROF== Disconnected from process", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
