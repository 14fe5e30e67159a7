// A toy inventory: a few independent definitions for the chunker's tests.

function makeItem(name, quantity, priceCents) {
  return { name: name, quantity: quantity, priceCents: priceCents };
}

function restock(items, name, amount) {
  for (const item of items) {
    if (item.name === name) {
      item.quantity += amount;
      return;
    }
  }
  items.push(makeItem(name, amount, 0));
}

function inventoryValue(items) {
  let total = 0;
  for (const item of items) {
    total += item.quantity * item.priceCents;
  }
  return total;
}

class Ledger {
  constructor() {
    this.entries = [];
  }

  record(what, cents) {
    this.entries.push([what, cents]);
  }

  balance() {
    return this.entries.reduce((sum, entry) => sum + entry[1], 0);
  }
}

module.exports = { makeItem, restock, inventoryValue, Ledger };
