package config

import "fmt"

// validateLease checks the leasing settings.
func (c Config) validateLease() error {
	switch {
	case c.Lease < 0:
		return fmt.Errorf("%w: lease %v is negative", ErrInvalid, c.Lease)
	case c.LeaseMax < 0:
		return fmt.Errorf("%w: lease_max %d is negative", ErrInvalid, c.LeaseMax)
	case c.Lease > 0 && c.Store == "memory":
		return fmt.Errorf("%w: lease %v: leases share a Redis store among processes; the store is memory", ErrInvalid, c.Lease)
	case c.LeaseMax > 0 && c.Lease == 0:
		return fmt.Errorf("%w: lease_max %d without lease", ErrInvalid, c.LeaseMax)
	case c.LeaseShares && c.Lease == 0:
		return fmt.Errorf("%w: lease_shares without lease", ErrInvalid)
	}
	return nil
}
