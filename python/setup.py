"""Builds the loom package: the extension loom._C (python/src/*.c) linked
with Loom's static library, which scripts/build.sh builds when the build
directory (LOOM_BUILD_DIR, default build/) lacks it. Installed by
scripts/install_python.sh: pip install --no-build-isolation python/."""
import glob
import os
import subprocess

from setuptools import Extension, find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BUILD = os.environ.get("LOOM_BUILD_DIR", os.path.join(ROOT, "build"))
LIB = os.path.join(BUILD, "libloom_static.a")

if not os.path.exists(LIB):
    subprocess.check_call([os.path.join(ROOT, "scripts", "build.sh"), "release", "loom_static"])

# What the static library needs besides (MPI, when Loom was built with it).
with open(os.path.join(BUILD, "static_link_libs.txt")) as f:
    EXTRA_LIBS = [p for p in f.read().split(";") if p.strip()]

os.chdir(HERE)  # setuptools wants sources relative to setup.py
setup(
    name="loom",
    version="0.1.0",
    description="Loom: an AI compiler and runtime, from Python in PyTorch's idiom",
    packages=find_packages(include=["loom", "loom.*"]),
    python_requires=">=3.9",
    install_requires=["numpy"],
    ext_modules=[Extension(
        "loom._C",
        sources=sorted(glob.glob("src/*.c")),
        include_dirs=[os.path.join(ROOT, "include"), "src"],
        extra_objects=[LIB] + EXTRA_LIBS,
        libraries=["m", "pthread", "dl", "protobuf-c"],
        extra_compile_args=["-std=c11", "-D_GNU_SOURCE", "-fvisibility=hidden"],
    )],
)
