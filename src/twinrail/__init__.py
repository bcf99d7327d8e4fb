"""twinrail: what runs outside Ansible. ``twinrail.guard`` is the inference
service's watchdog and memory guard, shipped to the nodes as a versioned
zipapp (``twinrail.guard.artifact``)."""

__version__ = "0.1.0"
