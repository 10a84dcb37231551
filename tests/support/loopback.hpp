// A listening socket on 127.0.0.1 for the test servers (tests/support/proxy.hpp, http.hpp).
#pragma once

#include <asio/ip/tcp.hpp>

namespace test {

/// Opens `acceptor` on 127.0.0.1 with an ephemeral port, listening; returns the port.
inline unsigned short listen_on_loopback(asio::ip::tcp::acceptor& acceptor) {
  acceptor.open(asio::ip::tcp::v4());
  acceptor.set_option(asio::ip::tcp::acceptor::reuse_address(true));
  acceptor.bind({asio::ip::make_address("127.0.0.1"), 0});
  acceptor.listen();
  return acceptor.local_endpoint().port();
}

}  // namespace test
