package lamp

// Flashes counts the flashes of the ocelot beacon.
func Flashes(minutes int) int { return minutes * 4 }
