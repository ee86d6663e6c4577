// The gRPC KvTransfer service (proto/baton/v1/kv_transfer.proto), served by decode workers:
// verifies every chunk's checksum and size and hands the data to a KvReceiver, and opens links
// (OpenKvLink, kv_link.h) for pushes whose bytes travel device to device. (The server's
// credentials check the token before any call gets here: rpc/auth.h.)
//
// Thread-safety: thread-safe; one reactor per PushKv stream owns that stream's state.
#ifndef BATON_KVTRANSFER_KV_TRANSFER_SERVICE_H_
#define BATON_KVTRANSFER_KV_TRANSFER_SERVICE_H_

#include <memory>

#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/service_type.h"  // grpc::Service complete, for unique_ptr
#include "kvtransfer/kv_receiver.h"
#include "kvtransfer/link_acceptor.h"

namespace baton::kvtransfer {

// `receiver` and `links` must outlive the service. `links`: where OpenKvLink opens links and
// pushes find them; null: this worker takes none (OpenKvLink answers UNIMPLEMENTED).
std::unique_ptr<grpc::Service> CreateKvTransferService(KvReceiver* receiver,
                                                       LinkAcceptor* links = nullptr);

}  // namespace baton::kvtransfer

#endif  // BATON_KVTRANSFER_KV_TRANSFER_SERVICE_H_
