"""The runtime the nodes run: how it is built and linked (build, elf_link), the canary that proves it before the weights move (canary), and the guard's artifact (guard_zipapp)."""
