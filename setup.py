"""setuptools' half of the Python package's build (pyproject.toml names the backend): the version is the
CMake project version of CMakeLists.txt, and build_ext configures and builds the CMake project (the static
flashattn library and the _core module, nothing else) for the interpreter that runs the build, then puts
the module into the package. The pure-Python modules come from python/flashattn/ as they are."""

import os
import re
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def project_version():
    """VERSION of `project(flashattn VERSION x.y.z ...)` in CMakeLists.txt: the one place it is defined."""
    match = re.search(r"project\(flashattn\s+VERSION\s+([0-9.]+)", (ROOT / "CMakeLists.txt").read_text())
    if not match:
        raise RuntimeError("CMakeLists.txt has no project(flashattn VERSION ...)")
    return match.group(1)


def pybind11_cmake_args():
    """pybind11's CMake package of the pybind11 Python module, when it has one (PyPI's wheel does; Debian's
    python3-pybind11 leaves it to pybind11-dev, which CMake finds by itself)."""
    try:
        import pybind11

        cmake_dir = pybind11.get_cmake_dir()
    except (ImportError, AttributeError):
        return []
    return [f"-Dpybind11_DIR={cmake_dir}"] if os.path.isdir(cmake_dir) else []


class CMakeBuild(build_ext):
    """Builds flashattn._core with CMake instead of compiling sources itself."""

    def build_extension(self, ext):
        build_dir = Path(self.build_temp).resolve() / "cmake"
        configure = [
            "cmake", "-S", str(ROOT), "-B", str(build_dir),
            "-DCMAKE_BUILD_TYPE=Release",
            f"-DPython_EXECUTABLE={sys.executable}",
            "-DBUILD_SHARED_LIBS=OFF",
            "-DFLASHATTN_BUILD_PYTHON=ON",
            "-DFLASHATTN_ENABLE_TESTS=OFF",
            "-DFLASHATTN_ENABLE_BENCH=OFF",
            "-DFLASHATTN_ENABLE_CLI=OFF",
        ] + pybind11_cmake_args()
        subprocess.run(configure, check=True)
        # Parallelism: CMAKE_BUILD_PARALLEL_LEVEL from the environment, as for any CMake build.
        subprocess.run(["cmake", "--build", str(build_dir), "--target", "flashattn_python"], check=True)
        built = list((build_dir / "python" / "flashattn").glob("_core*.so"))
        if len(built) != 1:
            raise RuntimeError(f"expected one _core module in {build_dir}/python/flashattn, found {built}")
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        self.copy_file(str(built[0]), str(target))


setup(
    version=project_version(),
    packages=["flashattn"],
    package_dir={"": "python"},
    ext_modules=[Extension("flashattn._core", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    # Out of build/, which is the CMake build directory of scripts/demo.sh and scripts/test.sh.
    options={"build": {"build_base": "build-pip"}},
    zip_safe=False,
)
