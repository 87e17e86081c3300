"""setuptools' half of the Python package's build (pyproject.toml names the backend): the version is the
CMake project version of CMakeLists.txt, and build_ext configures and builds the CMake project (the static
flashattn library, the _core module and, where MPI and mpi4py are installed, flashattn::mpi and the
_distributed module; nothing else) for the interpreter that runs the build, then puts the modules into the
package with the shared libraries they need beyond the C and C++ runtimes (Highway, OpenMP) and their
licenses, in flashattn/_libs/ (docs/packaging.md). The pure-Python modules come from python/flashattn/ as
they are."""

import functools
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import BaseError

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


# The package's directory of bundled shared libraries, which the modules' RUNPATH ($ORIGIN/_libs) names.
BUNDLED_LIBS_DIR = "_libs"
# What the package may take from the system, as a manylinux wheel may: the C library and its loader, the math
# library, the C++ runtime and GCC's unwinder; and _distributed's MPI (mpi_libraries). Every other shared
# library a module loads is bundled.
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


def mpi_libraries(loaded):
    """The sonames of the MPI libraries among a module's `loaded` libraries (libmpi*) and of every library
    they load: the package takes these from the system, as mpi4py does, since both must load the same MPI."""
    names = set()
    for name, path in loaded:
        if name.startswith("libmpi"):
            names |= {name} | {soname for soname, _ in loaded_libraries(path)}
    return names


def bundle_libraries(module, libs_dir):
    """Copies the shared libraries `module` loads beyond SYSTEM_LIBRARIES and MPI into libs_dir under their
    sonames, each with its Debian copyright file and the license texts that file cites, in
    libs_dir/licenses/. A library already there (another module's) is kept."""
    licenses = libs_dir / "licenses"
    (licenses / "common-licenses").mkdir(parents=True, exist_ok=True)
    loaded = loaded_libraries(module)
    from_system = mpi_libraries(loaded)
    for name, path in loaded:
        if name.startswith(SYSTEM_LIBRARIES) or name in from_system or (libs_dir / name).exists():
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
    """Builds the compiled modules with CMake instead of compiling sources itself: one CMake build, from
    which each module is copied into the package."""

    def run(self):
        # Copies of a previous build would be what ldd resolves the modules' libraries to, and a module this
        # build leaves out (an optional one) would go into the package as it was.
        libs_dir = Path(self.get_ext_fullpath("flashattn._core")).parent / BUNDLED_LIBS_DIR
        shutil.rmtree(libs_dir, ignore_errors=True)
        for ext in self.extensions:
            Path(self.get_ext_fullpath(ext.name)).unlink(missing_ok=True)
        super().run()

    @functools.cached_property
    def cmake_build_dir(self):
        """Configures and builds the CMake project once; the build directory."""
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
        # Parallelism: CMAKE_BUILD_PARALLEL_LEVEL from the environment, as for any CMake build. The target
        # flashattn_python builds _distributed too where CMake found MPI and mpi4py.
        subprocess.run(["cmake", "--build", str(build_dir), "--target", "flashattn_python"], check=True)
        return build_dir

    @functools.cached_property
    def built_modules(self):
        """The modules the CMake configuration builds (the file names in python/modules.txt, which CMake
        writes), not every module file in their directory: an earlier configuration's may still be there."""
        python_dir = self.cmake_build_dir / "python"
        names = (python_dir / "modules.txt").read_text().splitlines()
        return [python_dir / "flashattn" / name for name in names if name]

    def build_extension(self, ext):
        module = ext.name.rsplit(".", 1)[1]
        built = [path for path in self.built_modules if path.name.startswith(f"{module}.")]
        if not built and ext.optional:
            # BaseError (distutils' DistutilsError) is what setuptools reports and skips for an optional module.
            raise BaseError(f"{ext.name} was not built: CMake found no MPI or no mpi4py (the configure output "
                            "says which; scripts/install-deps.sh installs both)")
        if len(built) != 1:
            raise RuntimeError(f"expected one {module} module in {self.cmake_build_dir}/python/modules.txt, "
                               f"found {built}")
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        self.copy_file(str(built[0]), str(target))
        bundle_libraries(target, target.parent / BUNDLED_LIBS_DIR)


setup(
    version=project_version(),
    packages=["flashattn", "flashattn.distributed"],
    package_dir={"": "python"},
    # _distributed (flashattn.distributed's NumPy + mpi4py functions) only where MPI and mpi4py are installed;
    # without it flashattn.distributed.torch still works, and the MPI functions say what is missing.
    ext_modules=[Extension("flashattn._core", sources=[]),
                 Extension("flashattn._distributed", sources=[], optional=True)],
    cmdclass={"build_ext": CMakeBuild},
    # Out of build/, which is the CMake build directory of scripts/demo.sh and scripts/test.sh.
    options={"build": {"build_base": "build-pip"}},
    zip_safe=False,
)
