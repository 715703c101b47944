"""A PEP 517 / PEP 660 build backend for the vmem client, standard library
only, so that ``pip install client/python`` works offline: pip's isolated
build environment needs nothing (``requires = []``).

It builds a pure-Python wheel of the ``vmem`` package and of
``amplihack_memory`` (the seed 004 name of ``vmem.experience``)
(py3-none-any), an sdist, and an editable wheel (a .pth file naming this
directory). The version is read from ``vmem/__init__.py``.
"""

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

NAME = "vmem"
PACKAGES = (NAME, "amplihack_memory")
HERE = os.path.dirname(os.path.abspath(__file__))
SUMMARY = "Python client of vmemd, the vector memory daemon"
ZIP_DATE = (1980, 1, 1, 0, 0, 0)


def _version():
    with open(os.path.join(HERE, NAME, "__init__.py"), encoding="utf-8") as f:
        match = re.search(r'^__version__ = "([^"]+)"$', f.read(), re.M)
    if not match:
        raise RuntimeError("no __version__ in vmem/__init__.py")
    return match.group(1)


def _metadata():
    readme = ""
    path = os.path.join(HERE, "README.md")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            readme = f.read()
    head = ("Metadata-Version: 2.1\n"
            "Name: %s\n"
            "Version: %s\n"
            "Summary: %s\n"
            "Requires-Python: >=3.9\n"
            "Classifier: Programming Language :: Python :: 3\n"
            "Classifier: Operating System :: POSIX :: Linux\n"
            "Description-Content-Type: text/markdown\n"
            % (NAME, _version(), SUMMARY))
    return head + "\n" + readme


def _wheel_file():
    return ("Wheel-Version: 1.0\n"
            "Generator: vmem_build\n"
            "Root-Is-Purelib: true\n"
            "Tag: py3-none-any\n")


def _package_files():
    """(archive name, absolute path) of every file of the packages."""
    found = []
    for package in PACKAGES:
        pkg = os.path.join(HERE, package)
        for name in sorted(os.listdir(pkg)):
            if name.endswith(".py") or name == "py.typed":
                found.append(("%s/%s" % (package, name),
                              os.path.join(pkg, name)))
    return found


def _dist_info():
    return "%s-%s.dist-info" % (NAME, _version())


def _record_line(name, data):
    digest = hashlib.sha256(data).digest()
    b64 = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (name, b64, len(data))


def _write_wheel(wheel_directory, contents):
    """contents: [(archive name, bytes)]; adds the dist-info files and
    RECORD; returns the wheel's file name."""
    info = _dist_info()
    contents = list(contents) + [
        ("%s/METADATA" % info, _metadata().encode("utf-8")),
        ("%s/WHEEL" % info, _wheel_file().encode()),
        ("%s/top_level.txt" % info, ("\n".join(PACKAGES) + "\n").encode()),
    ]
    record = [_record_line(n, d) for n, d in contents]
    record.append("%s/RECORD,," % info)
    contents.append(("%s/RECORD" % info,
                     ("\n".join(record) + "\n").encode()))
    filename = "%s-%s-py3-none-any.whl" % (NAME, _version())
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w",
                         zipfile.ZIP_DEFLATED) as zf:
        for name, data in contents:
            zi = zipfile.ZipInfo(name, ZIP_DATE)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(zi, data)
    return filename


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory,
                                     config_settings=None):
    info = _dist_info()
    path = os.path.join(metadata_directory, info)
    os.makedirs(path, exist_ok=True)
    for name, text in (("METADATA", _metadata()), ("WHEEL", _wheel_file()),
                       ("top_level.txt", "\n".join(PACKAGES) + "\n")):
        with open(os.path.join(path, name), "w", encoding="utf-8") as f:
            f.write(text)
    return info


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None,
                metadata_directory=None):
    return _write_wheel(wheel_directory,
                        [(n, _read(p)) for n, p in _package_files()])


def build_editable(wheel_directory, config_settings=None,
                   metadata_directory=None):
    pth = (HERE + "\n").encode()
    return _write_wheel(wheel_directory, [("__editable__.%s.pth" % NAME,
                                           pth)])


def build_sdist(sdist_directory, config_settings=None):
    base = "%s-%s" % (NAME, _version())
    filename = base + ".tar.gz"
    members = [("PKG-INFO", _metadata().encode("utf-8"))]
    for name in ("pyproject.toml", "README.md", "vmem_build.py"):
        path = os.path.join(HERE, name)
        if os.path.exists(path):
            members.append((name, _read(path)))
    members += [(n, _read(p)) for n, p in _package_files()]
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz",
                      format=tarfile.PAX_FORMAT) as tf:
        for name, data in members:
            ti = tarfile.TarInfo("%s/%s" % (base, name))
            ti.size = len(data)
            ti.mode = 0o644
            ti.mtime = 0
            tf.addfile(ti, io.BytesIO(data))
    return filename
