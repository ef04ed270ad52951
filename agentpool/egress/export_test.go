package egress

// AddrClass is addrClass, for the table test.
var AddrClass = addrClass
