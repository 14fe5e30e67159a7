// Package inventory is a toy: a few independent definitions for the chunker's tests.
package inventory

type Item struct {
	Name       string
	Quantity   int
	PriceCents int
}

func Restock(items []Item, name string, amount int) []Item {
	for i := range items {
		if items[i].Name == name {
			items[i].Quantity += amount
			return items
		}
	}
	return append(items, Item{Name: name, Quantity: amount})
}

func InventoryValue(items []Item) int {
	total := 0
	for _, item := range items {
		total += item.Quantity * item.PriceCents
	}
	return total
}

type Ledger struct {
	entries []int
}

func (l *Ledger) Record(cents int) {
	l.entries = append(l.entries, cents)
}

func (l *Ledger) Balance() int {
	sum := 0
	for _, cents := range l.entries {
		sum += cents
	}
	return sum
}
