"""collective_due judges on the controller, in its own process (action_plugins/twinrail_judge.py)."""
from ansible.plugins.loader import action_loader

ActionModule = action_loader.get("twinrail_judge", class_only=True)
