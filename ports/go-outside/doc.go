// Package outside is a module of its own that checks a store it did not
// write through leasehold's porting API only: its test imports the store
// (leasehold's SQLite store, opened by its own factory) and package
// leaseholdtest, and runs the whole proof. It is what a porter's own
// repository looks like (with their store in place of impl/sqlite).
package outside
