"""Installs the I2A framework: i2a (runtime and binaries), envmodels, agents,
configs. The pinned stack moves together; see BUILD.md."""

from setuptools import find_packages, setup

# Reverb 0.14 is compiled against TF 2.15: these four move together.
PINNED = [
    "tensorflow==2.15.1",
    "tensorflow-probability==0.23.0",
    "dm-sonnet==2.0.2",
    "dm-reverb==0.14.0",
]

setup(
    name="i2a-framework",
    version="0.1.0",
    description=("Imagination-Augmented Agents with pluggable, pretrained, "
                 "frozen environment models (Weber et al. 2017; "
                 "Buesing et al. 2018)."),
    python_requires=">=3.9,<3.12",
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
        "imageio",
        "matplotlib",
        "portpicker",
    ],
    extras_require={"test": ["pytest>=7", "pytest-timeout"]},
)
