"""The lab's node image: Debian 12 made with debootstrap, the recipe of
tools/image/ run in a chroot and the result given to ``docker import``
(no registry is pulled), tagged by the recipe's hash so that an image of
the same recipe is built once per machine."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from lab_topology import LABEL, STATE_DIR, LabError, log, run

IMAGE_DIR = Path(__file__).resolve().parent / "image"


# Mounted read-only into every node's Python (not part of the image): a
# bytecode cache for modules imported from zip files, which is what every
# Ansible module run is (tools/image/python/twinrail_lab_pycache.py says why).
NODE_PYTHON_FILES = ("twinrail_lab_pycache.py", "twinrail-lab-pycache.pth")


NODE_PYTHON_DIR = "/usr/local/lib/python3.11/dist-packages"


IMAGE_REPO = "twinrail-node"


DEBIAN_SUITE = "bookworm"


DEBIAN_MIRROR = os.environ.get("TWINRAIL_DEBIAN_MIRROR", "http://deb.debian.org/debian")


def require_docker() -> None:
    if not shutil.which("docker"):
        raise LabError("docker is not installed: `make lab` installs docker.io as root")
    if run(["docker", "info", "--format", "{{.ServerVersion}}"], check=False).returncode != 0:
        raise LabError("the Docker engine is not running: start dockerd "
                       "(`make lab` starts it when run as root)")


def image_recipe_hash() -> str:
    digest = hashlib.sha256()
    for part in ("packages.txt", "recipe.sh"):
        digest.update(part.encode() + b"\0" + (IMAGE_DIR / part).read_bytes() + b"\0")
    digest.update(DEBIAN_SUITE.encode())
    return digest.hexdigest()[:12]


def image_tag() -> str:
    return f"{IMAGE_REPO}:{image_recipe_hash()}"


def image_packages() -> list[str]:
    lines = (IMAGE_DIR / "packages.txt").read_text().splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]


def build_image() -> str:
    """Build the node image unless an image of the same recipe exists."""
    tag = image_tag()
    if run(["docker", "image", "inspect", tag], check=False).returncode == 0:
        return tag
    if os.geteuid() != 0:
        raise LabError("building the lab image needs root (debootstrap, chroot)")
    if not shutil.which("debootstrap"):
        raise LabError("debootstrap is not installed: apt-get install debootstrap")
    log(f"building image {tag} with debootstrap ({DEBIAN_SUITE}, {DEBIAN_MIRROR})")
    started = time.monotonic()
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=STATE_DIR, prefix="rootfs-") as tmp:
        root = Path(tmp) / "root"
        run(["debootstrap", "--variant=minbase",
             "--include=" + ",".join(image_packages()),
             DEBIAN_SUITE, str(root), DEBIAN_MIRROR])
        shutil.copy(IMAGE_DIR / "recipe.sh", root / "tmp" / "recipe.sh")
        run(["chroot", str(root), "/bin/sh", "/tmp/recipe.sh"])
        (root / "tmp" / "recipe.sh").unlink()
        tar = subprocess.Popen(["tar", "-C", str(root), "--numeric-owner", "-c", "."],
                               stdout=subprocess.PIPE)
        imp = subprocess.run(
            ["docker", "import",
             "--change", 'CMD ["/sbin/init"]',
             "--change", f"LABEL {LABEL}.recipe={image_recipe_hash()}",
             "-", tag],
            stdin=tar.stdout, capture_output=True, check=False)
        tar.stdout.close()
        if tar.wait() != 0 or imp.returncode != 0:
            raise LabError(f"docker import failed: {imp.stderr.decode().strip()}")
    log(f"image {tag} built in {time.monotonic() - started:.0f} s")
    return tag
