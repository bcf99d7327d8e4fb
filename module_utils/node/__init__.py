"""A node's own state: free space, memory as the guard sees it, sysctl values, system backups, and a unit's journal since it started."""
