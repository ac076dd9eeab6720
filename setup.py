"""Installs the I2A framework: i2a (runtime and binaries), envmodels, agents,
configs, and the binaries as console scripts (i2a-train, ...: the same as
`python -m i2a.train`). The pinned stack moves together; see BUILD.md.
Python 3.11 only (SUPPORTED_PYTHON; BUILD.md says the same, checked by
tests/test_usability.py)."""

from setuptools import find_packages, setup

# Reverb 0.14 is compiled against TF 2.15: these four move together.
PINNED = [
    "tensorflow==2.15.1",
    "tensorflow-probability==0.23.0",
    "dm-sonnet==2.0.2",
    "dm-reverb==0.14.0",
]

# The one supported Python: the lock file (constraints.txt) resolves on it.
SUPPORTED_PYTHON = "3.11"

# console script -> the binary module (each has entry(), running app.run).
BINARIES = {
    "i2a-collect": "i2a.collect",
    "i2a-pretrain": "i2a.pretrain",
    "i2a-evaluate-models": "i2a.evaluate_models",
    "i2a-train": "i2a.train",
    "i2a-evaluate": "i2a.evaluate",
    "i2a-launch": "i2a.launch",
    "i2a-plan": "i2a.plan",
    "i2a-sweep": "i2a.sweep",
    "i2a-demo": "i2a.demo",
}

setup(
    name="i2a-framework",
    version="0.1.0",
    description=("Imagination-Augmented Agents with pluggable, pretrained, "
                 "frozen environment models (Weber et al. 2017; "
                 "Buesing et al. 2018)."),
    license="Apache-2.0",
    classifiers=[
        "License :: OSI Approved :: Apache Software License",
        "Programming Language :: Python :: 3",
        f"Programming Language :: Python :: {SUPPORTED_PYTHON}",
        "Programming Language :: Python :: 3 :: Only",
        "Operating System :: POSIX :: Linux",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
    python_requires=f"=={SUPPORTED_PYTHON}.*",
    packages=find_packages(include=["i2a", "i2a.*", "envmodels", "envmodels.*",
                                    "agents", "agents.*", "configs",
                                    "configs.*"]),
    install_requires=PINNED + [
        "numpy>=1.23,<2",
        "gymnasium>=1.0,<2",
        "ale-py>=0.9",
        "absl-py",
        "ml-collections",
        "pillow",
        "matplotlib",
        "portpicker",
    ],
    extras_require={
        "test": ["pytest>=7", "pytest-timeout", "pytest-xdist"],
        # i2a.launch --backend=ray (docs/distributed.md).
        "ray": ["ray>=2.40,<3"],
    },
    entry_points={"console_scripts": [
        f"{script} = {module}:entry" for script, module in BINARIES.items()]},
)
