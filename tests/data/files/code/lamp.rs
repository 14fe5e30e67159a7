/// Oil left in the tank after the axolotl burner runs `hours` hours.
pub fn oil_left(litres: f64, hours: f64) -> f64 {
    (litres - hours * 0.3).max(0.0)
}
