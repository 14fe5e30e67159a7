// A toy inventory: a few independent definitions for the chunker's tests.

export interface Item {
  name: string;
  quantity: number;
  priceCents: number;
}

export function restock(items: Item[], name: string, amount: number): void {
  for (const item of items) {
    if (item.name === name) {
      item.quantity += amount;
      return;
    }
  }
  items.push({ name, quantity: amount, priceCents: 0 });
}

export function inventoryValue(items: Item[]): number {
  let total = 0;
  for (const item of items) {
    total += item.quantity * item.priceCents;
  }
  return total;
}

export class Ledger {
  private entries: Array<[string, number]> = [];

  record(what: string, cents: number): void {
    this.entries.push([what, cents]);
  }

  balance(): number {
    return this.entries.reduce((sum, entry) => sum + entry[1], 0);
  }
}
