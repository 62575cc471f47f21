package packaging

import (
	"fmt"
	"strconv"
)

func fmtSscan(s string, v *int) (int, error) { return fmt.Sscan(s, v) }

func itoa(u uint32) string { return strconv.FormatUint(uint64(u), 10) }
