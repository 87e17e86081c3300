"""The Python package as a user installs it (README.md, "Use from Python"), with no package index:

1. a clean copy of the source: the files git tracks, as they are in the working tree (no build directory);
2. a fresh venv (--system-site-packages, for Debian's NumPy, pytest and PyTorch): `pip install
   --no-build-isolation --no-index <copy>`, then the Python test suite (tests/python) against the
   installed package (flashattn.__file__ is checked to be in the venv) and its version against the
   project's;
3. `python3 -m build --wheel --no-isolation` in the same copy, the wheel installed into a second fresh venv:
   the import, its location, the version and one call against NumPy, with Highway and OpenMP loaded from
   the package; with FLASHATTN_EXPECT_DISTRIBUTED=1 (set where the build has MPI and mpi4py), also
   flashattn.distributed and one ring call over MPI.COMM_SELF against the same float64 reference;
4. in both installs, the bundled libraries (docs/packaging.md): each module's RUNPATH is $ORIGIN/_libs, ldd
   resolves libhwy and libgomp inside the package, and each comes with its license; _distributed's MPI
   comes from the system;
5. `pip uninstall -y flashattn` in both: each venv's site-packages holds exactly what it held before.

Usage: python3 pip_install_test.py SOURCE_DIR WORK_DIR VERSION [pytest marker expression]"""

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

source_dir, work_dir, version = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
markers = sys.argv[4] if len(sys.argv) > 4 else None
expect_distributed = os.environ.get("FLASHATTN_EXPECT_DISTRIBUTED") == "1"

# No index, no cache in the home directory, no version check; the build's parallelism (CI has 2 cores).
env = dict(os.environ, PIP_NO_INDEX="1", PIP_NO_CACHE_DIR="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
           PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1")
env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", "2")
# One SIMD target at -O1: this test checks the packaging, and the release build compiles and tests every
# target's kernels at the build's own optimization (cmake/simd_targets.cmake). On the Zen 3 the library and
# both modules then compiled in 120 s of CPU instead of 232 s (two targets at -O3; docs/robustness.md).
env.setdefault("CMAKE_ARGS", "-DFLASHATTN_SIMD_TARGETS=baseline '-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG'")
for variable in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"):
    env.pop(variable, None)


def run(*command, cwd=None):
    print("+", " ".join(str(part) for part in command), flush=True)
    subprocess.run([str(part) for part in command], cwd=cwd, env=env, check=True)


def output(*command):
    return subprocess.run([str(part) for part in command], cwd=work_dir, env=env, check=True,
                          capture_output=True, text=True).stdout.strip()


def make_venv(name):
    venv = work_dir / name
    run(sys.executable, "-m", "venv", "--system-site-packages", venv)
    python = venv / "bin" / "python3"
    site = Path(output(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"))
    return python, site


def listing(site):
    return sorted(str(path.relative_to(site)) for path in site.rglob("*"))


# The shared libraries setup.py copies into flashattn/_libs on Debian: the module needs no other library
# than glibc's, the C++ runtime and GCC's unwinder.
BUNDLED_LIBRARIES = {"libhwy.so.1", "libgomp.so.1"}


def check_bundled_libraries(site):
    """Each installed module finds Highway and OpenMP in the package, the package has their licenses, and
    _distributed loads the system's MPI (the one mpi4py loads)."""
    package = site / "flashattn"
    libs = package / "_libs"
    modules = sorted(package.glob("_core*.so")) + sorted(package.glob("_distributed*.so"))
    expected = 2 if expect_distributed else 1
    assert len(modules) == expected, f"{package} holds the modules {[m.name for m in modules]}, expected {expected}"
    for module in modules:
        dynamic = output("readelf", "-d", module)
        assert "(RUNPATH)" in dynamic and "[$ORIGIN/_libs]" in dynamic, f"{module} has no RUNPATH $ORIGIN/_libs:\n{dynamic}"
        resolved = {}  # soname → path, from ldd's lines "libhwy.so.1 => /path/libhwy.so.1 (0x...)"
        for line in output("ldd", module).splitlines():
            fields = line.split()
            if len(fields) >= 3 and fields[1] == "=>":
                resolved[fields[0]] = fields[2]
        for name in BUNDLED_LIBRARIES:
            where = resolved.get(name, "nothing")
            assert os.path.realpath(where) == os.path.realpath(libs / name), f"ldd resolves {name} to {where}, not {libs}"
        if module.name.startswith("_distributed"):
            mpi = {name: where for name, where in resolved.items() if name.startswith("libmpi")}
            assert mpi and not any(where.startswith(str(package)) for where in mpi.values()), \
                f"{module.name} loads MPI from {mpi}, not from the system"
    bundled = {path.name for path in libs.glob("*.so*")}
    assert bundled == BUNDLED_LIBRARIES, f"{libs} holds {sorted(bundled)}, expected {sorted(BUNDLED_LIBRARIES)}"
    for name in bundled:
        license_text = (libs / "licenses" / f"{name}.copyright").read_text()
        for cited in set(re.findall(r"/usr/share/common-licenses/([A-Za-z0-9+-]+(?:\.[0-9]+)?)", license_text)):
            assert (libs / "licenses" / "common-licenses" / cited).is_file(), f"{name}'s license cites {cited}"
    print(f"{', '.join(m.name for m in modules)}: RUNPATH $ORIGIN/_libs; {', '.join(sorted(bundled))} from {libs}",
          flush=True)


def check_uninstall(python, site, before):
    run(python, "-m", "pip", "uninstall", "-y", "flashattn")
    after = listing(site)
    assert after == before, (f"pip uninstall left {sorted(set(after) - set(before))} behind and removed "
                             f"{sorted(set(before) - set(after))}")


test_start = time.monotonic()
shutil.rmtree(work_dir, ignore_errors=True)
work_dir.mkdir(parents=True)

# 1. The files git tracks, from the working tree: what a fresh clone has, with uncommitted edits.
copy = work_dir / "source"
tracked = subprocess.run(["git", "-C", source_dir, "ls-files", "-z"], check=True, capture_output=True).stdout
for name in tracked.decode().split("\0"):
    if name and (source_dir / name).is_file():
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source_dir / name, copy / name)

# 2. pip install . and the test suite against the installed package.
python_a, site_a = make_venv("venv-pip")
before_a = listing(site_a)
start = time.monotonic()
run(python_a, "-m", "pip", "install", "--no-build-isolation", "--no-index", copy)
print(f"pip install --no-build-isolation . took {time.monotonic() - start:.0f} s", flush=True)
installed = output(python_a, "-c", "import flashattn, flashattn._core, importlib.metadata as m; "
                   "print(flashattn.__file__, flashattn._core.__file__, flashattn.__version__, m.version('flashattn'))")
package_file, core_file, module_version, metadata_version = installed.split()
for path in (package_file, core_file):
    assert path.startswith(str(site_a / "flashattn") + "/"), f"flashattn imported from {path}, not {site_a}"
assert module_version == metadata_version == version, (module_version, metadata_version, version)
check_bundled_libraries(site_a)

# The suite from the copy, in a process that imports the installed flashattn before pytest starts, checks
# where it comes from, and then runs the tests with that module.
pytest_args = ["-q", "-p", "no:cacheprovider", str(copy / "tests" / "python")]
if markers:
    pytest_args += ["-m", markers]
run(python_a, "-c",
    "import sys, flashattn, pytest\n"
    f"assert flashattn.__file__.startswith({str(site_a)!r}), flashattn.__file__\n"
    f"sys.exit(pytest.main({pytest_args!r}))", cwd=work_dir)

# 3. The wheel, built in the same copy (its CMake build directory is reused), into another venv.
start = time.monotonic()
run(python_a, "-m", "build", "--wheel", "--no-isolation", "--skip-dependency-check", "--outdir", work_dir / "dist", copy)
print(f"python3 -m build --wheel --no-isolation took {time.monotonic() - start:.0f} s", flush=True)
wheels = list((work_dir / "dist").glob(f"flashattn-{version}-*.whl"))
assert len(wheels) == 1, f"expected one flashattn-{version} wheel, got {wheels}"
python_b, site_b = make_venv("venv-wheel")
before_b = listing(site_b)
run(python_b, "-m", "pip", "install", "--no-index", wheels[0])
check_bundled_libraries(site_b)
run(python_b, "-c", f"""
import numpy as np
import flashattn
assert flashattn.__file__.startswith({str(site_b)!r} + "/flashattn/"), flashattn.__file__
assert flashattn.__version__ == {version!r}, flashattn.__version__
rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((2, 97, 3, 40)).astype(np.float32) for _ in range(3))
out = flashattn.flash_attn_func(q, k, v, causal=True)
s = np.einsum("bihc,bjhc->bhij", q.astype(np.float64), k.astype(np.float64)) / np.sqrt(40)
s = np.where(np.tril(np.ones((97, 97), bool)), s, -np.inf)
p = np.exp(s - s.max(-1, keepdims=True))
expected = np.einsum("bhij,bjhc->bihc", p / p.sum(-1, keepdims=True), v.astype(np.float64))
assert np.abs(out - expected).max() < 1e-5, np.abs(out - expected).max()
loaded = {{line.split()[-1] for line in open("/proc/self/maps") if "libhwy" in line or "libgomp" in line}}
libs = {os.path.realpath(site_b / "flashattn" / "_libs")!r}
bundled = {{libs + "/" + name for name in {sorted(BUNDLED_LIBRARIES)!r}}}
assert loaded == bundled, f"Highway and OpenMP loaded from {{sorted(loaded)}}, not from {{libs}}"
print("wheel: flashattn", flashattn.__version__, "from", flashattn.__file__, "matches NumPy")
""" + ("" if not expect_distributed else f"""
from mpi4py import MPI
import flashattn.distributed as fd
import flashattn._distributed
for module in (fd, flashattn._distributed):
    assert module.__file__.startswith({str(site_b)!r} + "/flashattn/"), module.__file__
ring = fd.ring_flash_attn_func(q, k, v, comm=MPI.COMM_SELF, causal=True)
assert np.abs(ring - expected).max() < 1e-5, np.abs(ring - expected).max()
print("wheel: flashattn.distributed from", fd.__file__, "matches NumPy on one rank")
"""), cwd=work_dir)

# 5. Uninstall leaves each venv as it was.
check_uninstall(python_a, site_a, before_a)
check_uninstall(python_b, site_b, before_b)
print(f"pip install, the Python tests, the wheel and pip uninstall: ok ({time.monotonic() - test_start:.0f} s)")
