// Package trust is the device's root of trust (docs/contract/trust.md): a
// strict, signed JSON document naming the root keys (they sign only roots),
// the release keys (they sign offers) and the operator keys, each with its
// threshold; and the chain rule by which root N+1 replaces root N. It reads
// and judges documents only: where a root is kept and how it arrives is the
// device's business.
package trust
