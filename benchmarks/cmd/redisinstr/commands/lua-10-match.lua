local a, b, c = '@j81000000/1000000000:1796616088 1796616088753908', '@j81000000/1000000000:', '1796616088753908'
local x
x = string.match(b, '^@..(%d+)/')
x = string.match(b, '^@..(%d+)/')
x = string.match(b, '^@..(%d+)/')
x = string.match(b, '^@..(%d+)/')
x = string.match(b, '^@..(%d+)/')
x = string.match(b, '^@..(%d+)/')
x = string.match(b, '^@..(%d+)/')
x = string.match(b, '^@..(%d+)/')
x = string.match(b, '^@..(%d+)/')
x = string.match(b, '^@..(%d+)/')
return 1
