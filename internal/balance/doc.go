// Package balance is the take decision of a worker sharing a stream's
// leases, as pure functions over its own small types: what a take round
// does with a listing of the stream's rows, and what each coordination
// role picks (the row that gets the deputy note, the owners woken, the
// leases taken at their deadline).
//
// The caller lists the rows, judges them on its own monotonic clock
// (which leases expired, stood still, were left over, which handoffs it
// asked for), hands the judgements in as a Listing and carries out the
// intents it gets back, each a conditional write on the counter the
// listing showed. A Round hands out a round's intents in the order they
// are carried out and takes each one's outcome (a take that failed does
// not count; a request refused is replaced by another), so that the whole
// decision stays here and the caller only writes. Nothing here does I/O or
// reads a clock: the same listing and outcomes give the same intents.
package balance
