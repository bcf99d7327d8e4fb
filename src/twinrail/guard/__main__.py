"""``python3 twinrail-guard.pyz agent|proxy|memory ...`` (the zipapp's entry)."""

from twinrail.guard.cli import main

main()
