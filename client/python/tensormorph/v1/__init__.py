"""Generated gRPC stubs of tensormorph.v1 (tensormorph_pb2, tensormorph_pb2_grpc).

Written at build time from proto/tensormorph/v1/tensormorph.proto; never
committed.
"""
