"""What the inventory says and whether it may: the names a site may set, the rules they follow, what a site serves, the hardware profiles and their gate, and the memory plan."""
