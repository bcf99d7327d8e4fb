"""What every twinrail module shares: the one way a judge module runs (judge), and the text a module shows under --diff (module_diff)."""
