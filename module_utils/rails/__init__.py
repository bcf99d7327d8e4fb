"""The rails and what moves over them: RDMA link state (rdma_link), perftest and iperf3 figures (perftest), NCCL's own words (nccl_log)."""
