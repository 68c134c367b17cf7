package main

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/treni-top/treni-top/engine/cuda"
)

func newDoctorCmd() *cobra.Command {
	var asJSON, floors bool
	var floorBytes int
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Report the NVIDIA driver, GPUs and CUDA libraries found, and what is missing",
		Long: `doctor loads the CUDA driver (libcuda.so.1) and cuBLASLt the way the built-in
engine does at run time, lists the GPUs it sees with their memory and compute
capability, and for anything missing says where it looked and how to fix it.
Override the search with TRENI_CUDA_DRIVER (path to libcuda.so.1) and
TRENI_CUDA_LIB_DIR (folders holding libcublasLt.so.*).

--floors also measures the machine's physical floors on GPU 0: cuInit,
primary context retain, pageable/registered/pinned host→device bandwidth,
cuMemHostRegister and cuMemHostAlloc cost, device copy bandwidth, cuBLASLt's
bf16 matrix rate (an 8192³ product on random data, timed with device
events: the ceiling a workload's prefill FLOPs are set against), how fast
the staged upload's reader threads copy a file out of the page cache (alone
and beside a pinned copy), and how fast the copy engine reads that file's
pages registered in place (it writes a file of up to 1 GiB to TMPDIR; put
TMPDIR on the weights' file system).`,
		Example: `  treni-top doctor
  treni-top doctor --json
  treni-top doctor --floors --floor-bytes 1073741824`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cuda.RunCheckup(cmd.Context(), floors, floorBytes)
			if err != nil {
				return withExit(2, err)
			}
			// --floors asked for measurements: none is a failure (exit 2),
			// after the report that says what is missing.
			var noFloors error
			if floors && c.Floors == nil {
				noFloors = withExit(2, errors.New("--floors needs a usable GPU; nothing measured (the report above says what is missing)"))
			}
			if asJSON {
				b, _ := json.MarshalIndent(c, "", "  ")
				fmt.Fprintln(cmd.OutOrStdout(), string(b))
				return noFloors
			}
			fmt.Fprint(cmd.OutOrStdout(), c.Text())
			return noFloors
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.Flags().BoolVar(&floors, "floors", false, "also measure cuInit, context, H2D, device-copy, bf16 GEMM and page-cache read floors on GPU 0 and this host")
	cmd.Flags().IntVar(&floorBytes, "floor-bytes", 1<<30, "bytes per copy when measuring floors")
	return cmd
}
