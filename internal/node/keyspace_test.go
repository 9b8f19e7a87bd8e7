package node

import (
	"fmt"
	"testing"
)

// TestKeySlot: the Redis Cluster specification's CRC16 check value and
// slots, hash tags included; every slot has a tag that hashes to it.
func TestKeySlot(t *testing.T) {
	if got := crc16("123456789"); got != 0x31c3 {
		t.Fatalf("crc16 = %#x, want 0x31c3", got)
	}
	for key, want := range map[string]int{
		"foo": 12182, "{foo}.bar": 12182, "a{foo}b{x}": 12182, "{}foo": Slot("{}foo"), "{foo": crcSlot("{foo"),
	} {
		if got := Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
	if Slot("{}foo") != crcSlot("{}foo") {
		t.Error("an empty hash tag must hash the whole key")
	}
	for slot, tag := range slotTags() {
		if Slot("{"+tag+"}") != slot {
			t.Fatalf("tag %q of slot %d hashes to %d", tag, slot, Slot("{"+tag+"}"))
		}
	}
	for i := range 1000 {
		rk := RedisKey("quorumlock:", fmt.Sprint("order:", i))
		if fk := FenceKey("quorumlock:", rk, true); Slot(fk) != Slot(rk) {
			t.Fatalf("counter %q of %q is in slot %d, the lock in %d", fk, rk, Slot(fk), Slot(rk))
		}
	}
}

func crcSlot(s string) int { return int(crc16(s) % ClusterSlots) }
