"""`twinrail`: the operator's command line (status, logs) over the Ansible
inventory, on Fabric (SSH with paramiko, host keys checked as Ansible checks
them). Runs on the controller, from the project's checkout."""
