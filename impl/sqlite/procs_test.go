package sqlite_test

import "runtime"

func testingProcs() int { return max(1, runtime.GOMAXPROCS(0)) }
