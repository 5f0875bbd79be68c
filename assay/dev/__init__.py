"""What a developer runs to try Assay without an account: loopback fakes of the judge providers'
APIs (``assay dev fake-judge``), also the tests' and benchmarks' fakes."""
