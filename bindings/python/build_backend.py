"""PEP 517 build backend of the clade Python package (standard library only).

`pip install ./bindings/python` builds a pure-Python wheel of clade/ with
this module: pyproject.toml names it with `backend-path = ["."]` and no
build requirement, so pip's isolated build downloads nothing and the install
works offline. Its one addition to the sources is clade/_config.py, which
records the folder where libclade was found when the wheel was built:
CLADE_LIB_DIR if set, else `pkg-config --variable=libdir clade` (None when
neither answers: the package then looks on the loader's path at import, see
clade/_lib.py). So a package installed with PKG_CONFIG_PATH pointing at a
private prefix finds that library later with no environment variable.
"""

import base64
import hashlib
import io
import os
import re
import subprocess
import tarfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
NAME = "clade"
SUMMARY = ("Python bindings (ctypes) of libclade, shared-prefix LLM inference for Llama-family "
           "GGUF models")
TAG = "py3-none-any"
EPOCH = (2026, 1, 1, 0, 0, 0)  # fixed timestamps: the same sources give the same wheel


def _version():
    with open(os.path.join(HERE, NAME, "_lib.py"), encoding="utf-8") as f:
        m = re.search(r'^CLADE_VERSION_STRING = "([^"]+)"', f.read(), re.M)
    if not m:
        raise RuntimeError("CLADE_VERSION_STRING not found in clade/_lib.py")
    return m.group(1)


def _libdir():
    env = os.environ.get("CLADE_LIB_DIR")
    if env:
        return os.path.abspath(env)
    try:
        r = subprocess.run(["pkg-config", "--variable=libdir", NAME], capture_output=True, text=True,
                           timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    d = r.stdout.strip()
    return os.path.realpath(d) if r.returncode == 0 and d else None


def _metadata():
    return ("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: %s\nLicense: MIT\n"
            "Requires-Python: >=3.8\n" % (NAME, _version(), SUMMARY))


def _wheel_info():
    return "Wheel-Version: 1.0\nGenerator: clade build_backend\nRoot-Is-Purelib: true\nTag: %s\n" % TAG


def _sources():
    pkg = os.path.join(HERE, NAME)
    for name in sorted(os.listdir(pkg)):
        if name.endswith(".py") and name != "_config.py":
            yield NAME + "/" + name, os.path.join(pkg, name)


def _dist_info():
    return "%s-%s.dist-info" % (NAME, _version())


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    d = os.path.join(metadata_directory, _dist_info())
    os.makedirs(d, exist_ok=True)
    for name, text in (("METADATA", _metadata()), ("WHEEL", _wheel_info())):
        with open(os.path.join(d, name), "w", encoding="utf-8") as f:
            f.write(text)
    return _dist_info()


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = []
    for arc, path in _sources():
        with open(path, "rb") as f:
            files.append((arc, f.read()))
    libdir = _libdir()
    config = ('"""Where libclade was found when this package was built (build_backend.py)."""\n\n'
              "LIBDIR = %r\n" % libdir)
    files.append((NAME + "/_config.py", config.encode()))
    info = _dist_info()
    files += [(info + "/METADATA", _metadata().encode()), (info + "/WHEEL", _wheel_info().encode()),
              (info + "/top_level.txt", (NAME + "\n").encode())]
    record = ""
    for arc, data in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += "%s,sha256=%s,%d\n" % (arc, digest, len(data))
    record += info + "/RECORD,,\n"
    files.append((info + "/RECORD", record.encode()))
    wheel = "%s-%s-%s.whl" % (NAME, _version(), TAG)
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel), "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in files:
            zi = zipfile.ZipInfo(arc, EPOCH)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    return wheel


def build_sdist(sdist_directory, config_settings=None):
    base = "%s-%s" % (NAME, _version())
    name = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as t:
        entries = [("pyproject.toml", os.path.join(HERE, "pyproject.toml")),
                   ("build_backend.py", os.path.join(HERE, "build_backend.py"))] + list(_sources())
        for arc, path in entries:
            t.add(path, arcname=base + "/" + arc)
        data = _metadata().encode()
        ti = tarfile.TarInfo(base + "/PKG-INFO")
        ti.size = len(data)
        t.addfile(ti, io.BytesIO(data))
    return name
