// A toy inventory: a few independent definitions for the chunker's tests.
package inventory;

import java.util.ArrayList;
import java.util.List;

public class Inventory {
    private final List<Item> items = new ArrayList<>();

    public void restock(String name, int amount) {
        for (Item item : items) {
            if (item.name.equals(name)) {
                item.quantity += amount;
                return;
            }
        }
        items.add(new Item(name, amount, 0));
    }

    public long inventoryValue() {
        long total = 0;
        for (Item item : items) {
            total += (long) item.quantity * item.priceCents;
        }
        return total;
    }

    public Item cheapest() {
        Item best = null;
        for (Item item : items) {
            if (best == null || item.priceCents < best.priceCents) {
                best = item;
            }
        }
        return best;
    }
}
