"""setuptools' half of the Python package's build (pyproject.toml names the backend): the version is the
CMake project version of CMakeLists.txt, and build_ext configures and builds the CMake project (the static
flashattn library and the _core module, nothing else) for the interpreter that runs the build, then puts
the module into the package with the shared libraries it needs beyond the C and C++ runtimes (Highway,
OpenMP) and their licenses, in flashattn/_libs/ (docs/packaging.md). The pure-Python modules come from
python/flashattn/ as they are."""

import os
import re
import shlex
import shutil
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


# The package's directory of bundled shared libraries, which the module's RUNPATH ($ORIGIN/_libs) names.
BUNDLED_LIBS_DIR = "_libs"
# What the package may take from the system, as a manylinux wheel may: the C library and its loader, the math
# library, the C++ runtime and GCC's unwinder. Every other shared library the module loads is bundled.
SYSTEM_LIBRARIES = ("linux-vdso.so", "ld-linux", "libc.so", "libm.so", "libmvec.so", "libpthread.so", "libdl.so",
                    "librt.so", "libstdc++.so", "libgcc_s.so")
# The license texts a Debian copyright file cites (/usr/share/common-licenses/GPL-3, .../LGPL-2.1, ...).
COMMON_LICENSE = re.compile(r"/usr/share/common-licenses/([A-Za-z0-9+-]+(?:\.[0-9]+)?)")


def loaded_libraries(binary):
    """(name, path) of every shared library the dynamic loader loads with `binary`, as ldd resolves them."""
    listing = subprocess.run(["ldd", str(binary)], check=True, capture_output=True, text=True).stdout
    libraries = []
    for line in listing.splitlines():
        if "not found" in line:
            raise RuntimeError(f"{binary} needs a library the loader cannot find: {line.strip()}")
        match = re.match(r"\s*(\S+) => (\S+) \(0x", line)
        if match:
            libraries.append((match.group(1), match.group(2)))
    return libraries


def debian_copyright(library):
    """/usr/share/doc/<package>/copyright of the Debian package that ships `library`, or None off Debian."""
    try:
        owner = subprocess.run(["dpkg", "-S", os.path.realpath(library)], check=True, capture_output=True,
                               text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    package = owner.split(":")[0]
    copyright_file = Path("/usr/share/doc") / package / "copyright"
    return copyright_file if copyright_file.is_file() else None


def bundle_libraries(module, libs_dir):
    """Copies the shared libraries `module` loads beyond SYSTEM_LIBRARIES into libs_dir under their sonames,
    each with its Debian copyright file and the license texts that file cites, in libs_dir/licenses/."""
    shutil.rmtree(libs_dir, ignore_errors=True)  # else ldd would resolve to the copies of a previous build
    licenses = libs_dir / "licenses"
    (licenses / "common-licenses").mkdir(parents=True)
    for name, path in loaded_libraries(module):
        if name.startswith(SYSTEM_LIBRARIES):
            continue
        shutil.copy2(os.path.realpath(path), libs_dir / name)
        copyright_file = debian_copyright(path)
        if copyright_file is None:
            print(f"warning: no Debian copyright file for {path}; add its license to {licenses}", flush=True)
            continue
        shutil.copyfile(copyright_file, licenses / f"{name}.copyright")
        for cited in sorted(set(COMMON_LICENSE.findall(copyright_file.read_text(errors="replace")))):
            text = Path("/usr/share/common-licenses") / cited
            if text.is_file():
                shutil.copyfile(text, licenses / "common-licenses" / cited)


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
            f"-DFLASHATTN_PYTHON_BUNDLED_LIBS_DIR={BUNDLED_LIBS_DIR}",
        ] + pybind11_cmake_args()
        # More cache settings from CMAKE_ARGS, split as a shell would (scikit-build's and conda-build's
        # convention), e.g. CMAKE_ARGS="-DFLASHATTN_SIMD_TARGETS=reduced" for a quicker build
        configure += shlex.split(os.environ.get("CMAKE_ARGS", ""))
        subprocess.run(configure, check=True)
        # Parallelism: CMAKE_BUILD_PARALLEL_LEVEL from the environment, as for any CMake build.
        subprocess.run(["cmake", "--build", str(build_dir), "--target", "flashattn_python"], check=True)
        built = list((build_dir / "python" / "flashattn").glob("_core*.so"))
        if len(built) != 1:
            raise RuntimeError(f"expected one _core module in {build_dir}/python/flashattn, found {built}")
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        self.copy_file(str(built[0]), str(target))
        bundle_libraries(target, target.parent / BUNDLED_LIBS_DIR)


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
