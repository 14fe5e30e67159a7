"""A toy inventory: a few independent definitions for the chunker's tests."""

import dataclasses


@dataclasses.dataclass
class Item:
    name: str
    quantity: int
    price_cents: int

    def total_cents(self) -> int:
        return self.quantity * self.price_cents


def restock(items: list[Item], name: str, amount: int) -> None:
    for item in items:
        if item.name == name:
            item.quantity += amount
            return
    items.append(Item(name=name, quantity=amount, price_cents=0))


def inventory_value(items: list[Item]) -> int:
    total = 0
    for item in items:
        total += item.total_cents()
    return total


def cheapest(items: list[Item]) -> Item | None:
    if not items:
        return None
    return min(items, key=lambda item: (item.price_cents, item.name))


class Ledger:
    def __init__(self) -> None:
        self.entries: list[tuple[str, int]] = []

    def record(self, what: str, cents: int) -> None:
        self.entries.append((what, cents))

    def balance(self) -> int:
        return sum(cents for _, cents in self.entries)
