"""The version has one home, include/cagrad.h: cagrad.__version__ comes from the linked
library (ca_version), and pyproject.toml's static version must repeat it."""

import pathlib
import re

from helpers import ca, needs_cagrad

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _header_version():
    text = (ROOT / "include" / "cagrad.h").read_text()
    return re.search(r'^#define CA_VERSION\s+"([^"]+)"', text, re.M).group(1)


@needs_cagrad
def test_version_is_the_c_librarys():
    assert ca.__version__ == ca._C.VERSION == _header_version()


def test_pyproject_version_equals_the_header():
    text = (ROOT / "pyproject.toml").read_text()
    m = re.search(r'^\[project\][^\[]*?^version\s*=\s*"([^"]+)"', text, re.M | re.S)
    assert m, "pyproject.toml has no static [project] version"
    assert m.group(1) == _header_version()
