//! A toy inventory: a few independent definitions for the chunker's tests.

pub struct Item {
    pub name: String,
    pub quantity: u32,
    pub price_cents: u64,
}

pub fn restock(items: &mut Vec<Item>, name: &str, amount: u32) {
    for item in items.iter_mut() {
        if item.name == name {
            item.quantity += amount;
            return;
        }
    }
    items.push(Item { name: name.to_string(), quantity: amount, price_cents: 0 });
}

pub fn inventory_value(items: &[Item]) -> u64 {
    let mut total = 0;
    for item in items {
        total += u64::from(item.quantity) * item.price_cents;
    }
    total
}

pub struct Ledger {
    entries: Vec<i64>,
}

impl Ledger {
    pub fn record(&mut self, cents: i64) {
        self.entries.push(cents);
    }

    pub fn balance(&self) -> i64 {
        self.entries.iter().sum()
    }
}
