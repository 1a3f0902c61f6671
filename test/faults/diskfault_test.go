package faults

func runDiskChild(args []string) int { return 2 }
