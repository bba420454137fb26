package daemon

// SnapshotCause exports snapshotCause to the tests.
var SnapshotCause = snapshotCause
